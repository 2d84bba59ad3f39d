"""Live grading: the OTLP receiver, assembly, routing and results out."""
