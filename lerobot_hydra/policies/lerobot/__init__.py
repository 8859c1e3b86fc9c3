"""LeRobot checkpoints behind the Policy protocol: the config (`config`), where a checkpoint comes from (`checkpoint`),
feature checks (`features`), the two LeRobot lines (`versions`), row-local noise (`noise`), per-row state (`rows`),
families run one row at a time (`one_row`, their chunks in `row_chunks`), which checkpoints run on the clock
(`clocked`), real-time chunking (`rtc`) and lanes of policy state (`runtime`)."""
