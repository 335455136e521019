"""One home for ranking: the profile of constants (profile.py), the stages that need no store
(stages.py, in the order search runs them) and each result's account of them (explain.py).

pmem.search runs the whole: keyword candidates and dense candidates from the store (the only
stages that read it, each given the profile), then thread lift, question penalty, the fusion share,
the fusion and dense first from here. The store's indexes take the constants they rank by from the
profile passed in (pmem.store: KeywordIndex.ranks, VectorIndex.ranks, EnglishVectors.rescore,
MemoryStore.questions).
"""
