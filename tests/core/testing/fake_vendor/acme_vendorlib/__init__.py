"""A stand-in vendor library: importing it is what a plugin module must not do when listed."""
