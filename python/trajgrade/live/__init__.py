"""Live grading: an OTLP receiver that assembles runs from spans and grades each as it ends
(docs/live-grading.md)."""
