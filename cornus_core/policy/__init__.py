"""cornus_core.policy"""
