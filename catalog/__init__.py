"""Catalog data (YAML) shipped inside the installed package as ``clusterplan.catalog_data``."""
