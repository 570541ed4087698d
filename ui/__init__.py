"""Streamlit-side helpers shared by the dashboard pages (the training logic is in brnn_core)."""
