"""Using a trained checkpoint: predictions, a look inside the network, checkpoints users upload.

    predictor  `Predictor`: probabilities, the row-by-row reading, attribution for one image
    explain    what the network thinks after t rows, and integrated gradients (captum)
    scores     a checkpoint's accuracy on the user's saved drawings
    uploads    saving an uploaded checkpoint safely

Images are prepared by `data.canvas` (the MNIST recipe), the same code that stores drawings.
"""
