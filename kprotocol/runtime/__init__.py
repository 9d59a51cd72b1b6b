"""Hand-written runtime shared by every generated message module."""
