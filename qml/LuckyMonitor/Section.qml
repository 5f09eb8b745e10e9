import QtQuick
import QtQuick.Controls
import QtQuick.Layouts

// A titled group of rows: a small caps title with a rule, then the content.
ColumnLayout {
    id: root
    property string title
    default property alias content: body.data

    Layout.fillWidth: true
    spacing: 4

    RowLayout {
        Layout.fillWidth: true
        Layout.topMargin: 6
        spacing: 8
        Label {
            text: root.title.toUpperCase()
            color: Theme.accent
            font.pixelSize: Theme.title
            font.bold: true
            font.letterSpacing: 1.2
        }
        Rectangle {
            Layout.fillWidth: true
            Layout.preferredHeight: 1
            Layout.alignment: Qt.AlignVCenter
            color: Theme.line
        }
    }
    ColumnLayout {
        id: body
        Layout.fillWidth: true
        spacing: 2
    }
}
