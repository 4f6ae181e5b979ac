"""The tinyq app's management commands."""
