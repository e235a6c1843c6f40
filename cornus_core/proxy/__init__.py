"""cornus_core.proxy"""
