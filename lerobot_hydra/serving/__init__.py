"""Policy serving: the wire format (`wire`), the client `policy=remote` (`client`, `connection`), the server
(`schema`, `server`, `chunks`), a sweep's server job and callback (`sweep_job`, `sweep_callback`) and its autotune."""
