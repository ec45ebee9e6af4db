"""clarilm"""
