"""clarifymt"""
