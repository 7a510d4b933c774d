-- Revision 0026: an exercise that shows its solution once due.
UPDATE assignments SET show_solution_after_due = TRUE WHERE id = 'assign-fix';
