"""cornus_core.wire"""
