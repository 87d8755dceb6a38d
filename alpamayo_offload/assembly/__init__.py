"""assembly subpackage."""
