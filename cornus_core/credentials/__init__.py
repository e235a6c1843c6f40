"""cornus_core.credentials"""
