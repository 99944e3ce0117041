"""The module path that pickles of states made before the core moved to ``puredetok._core`` name.

A pickled :class:`~puredetok.DecodeState` is its saved bytes in a :class:`~puredetok.SavedState`,
and a pickle names that class by its module: such pickles made before name
``puredetok.core.codec.SavedState``, which :mod:`puredetok.core.codec` keeps. Pickles made now name
``puredetok.SavedState``. Nothing else is here: import from :mod:`puredetok`.
"""
