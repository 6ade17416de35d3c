"""Privacy and cost across the methods (issue 19): the utility-privacy table."""
