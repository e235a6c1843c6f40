"""cornus_core.ninep"""
