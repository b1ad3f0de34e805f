"""Conversion: any source in (a folder, a label file, Hugging Face, WebDataset, other stores), a store out.

``datakit.convert`` is the function :func:`datakit.conversion.pipeline.convert`,
not this package: import the stages by their full path
(``from datakit.conversion.sources.folder import scan_folder``). This file imports
nothing, so that importing one stage does not import the others.
"""
