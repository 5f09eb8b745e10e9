"""Qt-free transport: the only code that opens and maps segments."""
