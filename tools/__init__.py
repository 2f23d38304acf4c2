"""edgetwin development tools, by job: board/, formats/, train/, bench/, demo/ (docs/ARCHITECTURE.md)."""
