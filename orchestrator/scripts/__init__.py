"""Scripts that run as files in a torch build's interpreter (make_random, the version probe): nothing of the package."""
