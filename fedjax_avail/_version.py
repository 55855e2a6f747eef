"""The package's version, in a module of its own so that no module imports the package's top
level to read it."""

__version__ = "0.1.0"
