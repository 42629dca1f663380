"""Training: config, data streams, one AMP step with accumulation and chunking, validation, the loop."""
