"""Talking to a registry and the state it leaves behind: the huggingface_hub seam (`client`) and its
error mapping (`errors`), credentials, `pull` and its records, and adapter references (`refs`)."""
