"""Data and training: the plant-log corpora, the QA corpus, distillation of the draft, the reranker fine-tune."""
