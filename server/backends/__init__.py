"""Deploy backends: where a deployment's workload and its caretaker run."""
