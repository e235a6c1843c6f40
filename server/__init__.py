"""cornus-server: sessions, relay, re-check, gateway and deploy backends."""
