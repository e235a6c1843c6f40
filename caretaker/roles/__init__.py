"""The caretaker's roles; each runs on the one shared server connection where it needs one."""
