"""cornus_core.spec"""
