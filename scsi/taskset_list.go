package scsi

// cmdList is the task set's list of commands in the order they run (taskSet), linked through
// their own prev and next fields: entering and leaving it allocate nothing.
type cmdList struct {
	head, tail *Command
}

func (l *cmdList) pushBack(c *Command) {
	c.prev, c.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = c
	} else {
		l.head = c
	}
	l.tail = c
}

func (l *cmdList) pushFront(c *Command) {
	c.prev, c.next = nil, l.head
	if l.head != nil {
		l.head.prev = c
	} else {
		l.tail = c
	}
	l.head = c
}

// remove unlinks c, which is in the list.
func (l *cmdList) remove(c *Command) {
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		l.head = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		l.tail = c.prev
	}
	c.prev, c.next = nil, nil
}
