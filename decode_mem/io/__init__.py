"""Input and output: lazy stacks, the camera model, emitter tables and their file formats."""
