"""SMLM simulation: emitters, PSFs, camera noise, training data and big synthetic stacks."""
