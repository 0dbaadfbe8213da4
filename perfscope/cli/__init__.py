"""The ``perfscope`` command line: one module per subcommand, errors mapped in ``main``."""
