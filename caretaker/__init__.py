"""cornus-caretaker: the per-pod sidecar running the pod's roles."""
