"""The package version: one place, readable by every layer (training stamps it into manifests,
the CLI prints it) without the training job importing the CLI package."""

__version__ = "0.1.0"
