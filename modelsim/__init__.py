"""A GPU-free stand-in for vLLM's OpenAI server with a scripted leave-copilot policy."""
