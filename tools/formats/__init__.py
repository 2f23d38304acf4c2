"""Model formats: converters to MBF, llama2.c files, the board tokenizer blob, the reranker delta, test models."""
