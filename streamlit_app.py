"""BRNN Dashboard: train a bidirectional LSTM on MNIST-style digits, live, and try it on your drawings."""

import streamlit as st

st.set_page_config(page_title="BRNN Dashboard", page_icon=":material/sync_alt:", layout="wide")
page = st.navigation([
    st.Page("app_pages/train.py", title="Train", icon=":material/model_training:", default=True),
    st.Page("app_pages/predict.py", title="Predict", icon=":material/draw:"),
    st.Page("app_pages/runs.py", title="Runs", icon=":material/table_chart:"),
])
page.run()
