"""Small pieces every service of the bundle uses the same way."""
