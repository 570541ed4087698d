"""Training one run: the loop, and everything that runs alongside it in the worker process.

    engine        train_one_epoch, evaluate, fit (the loop; mixed precision; divergence checks)
    worker        one run from start to end: device, data, warm start, fit, one `end_*` per outcome
    warmstart     every way a run starts from a checkpoint: resume, branch, PBT exploit, init_from
    recorder      fit's hooks that write metrics, status, events and checkpoints into the run directory
    control       the worker's side of the control channel: pause, resume, stop, live settings
    threads       how many CPU threads a training process uses, shared between processes
    loss_scaling  the fp16 loss scaler that counts skipped steps
    drawing_mix   the user's drawings mixed into a run's training images, held-out accuracy before/after
    teach         the TrainConfig of a short fine-tune of a checkpoint on the user's drawings (Teach it)
    reports       the test-set report written when a run finishes
    allocator     malloc tuning for long training processes

It writes through `runs.rundir` and reads through `data`; nothing below imports it.
"""
