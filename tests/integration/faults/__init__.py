"""Faults as the most trusted systems test them: each folder one kind of fault."""
