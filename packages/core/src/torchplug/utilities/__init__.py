"""Small helpers shared by the Trainer and the built-in plugins."""
