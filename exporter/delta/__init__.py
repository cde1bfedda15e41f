"""The Delta protocol: log file names, actions, replay, deletion vectors, column identity. Imports nothing of the product but errors."""
