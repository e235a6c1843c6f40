"""The app's screens: the dashboard, the PAC editor, help and teardown."""
