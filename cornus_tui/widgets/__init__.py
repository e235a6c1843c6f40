"""The dashboard's widgets; each reads one store and redraws only when its version moved."""
