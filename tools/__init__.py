"""edgetwin tools: build, deploy, virtual board."""
