"""HomeAgent: a personal AI agent daemon."""

__version__ = "0.1.0"
