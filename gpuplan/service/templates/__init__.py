"""Jinja2 templates of the HTML pages (a package so that they ship as package data)."""
