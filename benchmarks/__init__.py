"""Scripts that print figures, and the baseline loop they compare against."""
