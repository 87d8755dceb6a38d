"""replay subpackage."""
