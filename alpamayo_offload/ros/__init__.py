"""ros subpackage."""
