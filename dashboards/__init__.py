"""The Dash web dashboard: layout, thin callbacks and pure plotly figure functions."""
