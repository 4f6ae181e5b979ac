"""python manage.py tinyq_worker."""
