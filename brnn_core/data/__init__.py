"""Images in, tensors out: everything about the 28x28 images before a model sees them.

The datasets (names, classes, files), reading them whole into uint8 tensors, the train/validation split and
batches, on-device augmentation, the canvas recipe for a drawing, pen-stroke copies of training digits, and
the user's own saved drawings. Nothing here trains or imports the model: this is the bottom layer with
`config` and `checkpoint`. Each module's one line: docs/architecture.md.
"""
