"""Graph utilities every stage reads: the ids that follow a node from ATen to Edge, the one
schema binder, and the MACs of a node."""
